# The two set-up commands: `make run` starts the product, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest services chromium nginx bubblewrap bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when a requirements file changes.
$(VENV)/.runtime-installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@ $(VENV)/.runtime-installed

run: $(VENV)/.runtime-installed
	$(BIN)/python manage.py up

services:
	scripts/ensure-services.sh

# The admin console's browser test (tests/admin/test_browser.py) drives Debian's chromium; installed when missing.
chromium:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver)

# The fleet test (tests/e2e/test_fleet.py) and bench/fleet balance replicas with Debian's nginx; installed when missing.
nginx:
	command -v nginx >/dev/null || test -x /usr/sbin/nginx || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nginx-light)

# Sandboxes prefer Debian's bubblewrap (the wheel's copy works too, but its path under .venv is what a
# sandbox then reads from /proc/1/exe); the seccomp tests read the kernel's syscall numbers from
# linux-libc-dev and attach strace. Installed when missing.
bubblewrap:
	command -v bwrap >/dev/null && command -v strace >/dev/null && test -f /usr/include/asm-generic/unistd.h || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap strace linux-libc-dev)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy .

pytest: $(VENV)/.dev-installed services chromium nginx bubblewrap
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(VENV)/.dev-installed services nginx
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var
