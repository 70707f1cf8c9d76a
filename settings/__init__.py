"""Project settings: `base` for every deployment, `production` for `check --deploy`."""
