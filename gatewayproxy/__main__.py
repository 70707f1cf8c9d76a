"""`python -m gatewayproxy`: run the gateway without Django (see gatewayproxy.cli)."""

import sys

from gatewayproxy.cli import main

sys.exit(main())
