"""The `rungateway` command."""
