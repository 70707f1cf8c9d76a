"""App config for workspaces; at start-up it tells the admin's pages who holds which staff role where."""

from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "registry.workspaces"
    label = "workspaces"

    def ready(self) -> None:
        from registry.core.admin import use_staff_access
        from registry.workspaces.staff import workspaces_permitting

        use_staff_access(workspaces_permitting)
