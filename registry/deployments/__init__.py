"""Deployments: a named agent + environment + initial events fired on a cron schedule or by `run`; each
fire is a deployment run that records the session it created or the typed error that prevented it."""
