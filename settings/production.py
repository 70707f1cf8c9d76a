"""Production settings: the base settings hardened for `manage.py check --deploy`."""

from settings.base import *  # noqa: F403
from settings.base import env_bool, env_int, env_list, env_str

SECRET_KEY = env_str("SECRET_KEY")
if len(SECRET_KEY) < 50:
    raise RuntimeError("SECRET_KEY must be set to at least 50 random characters in production")
DEBUG = False
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost"])
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# Probes come over plain HTTP from the orchestrator.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
