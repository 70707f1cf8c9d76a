"""URL patterns of /v1/skills and /v1/skills/{id}/versions."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.skills.views import SkillVersionViewSet, SkillViewSet

versions = SkillVersionViewSet.as_view

urlpatterns = [
    *resource_urls("skills", SkillViewSet, "skill_id", name="skill"),
    path(
        "skills/<skill_id:id>/versions",
        versions({"get": "list", "post": "create"}),
        name="skill-versions",
    ),
    path(
        "skills/<skill_id:id>/versions/<str:version>",
        versions({"get": "retrieve", "delete": "destroy"}),
        name="skill-version-detail",
    ),
    path(
        "skills/<skill_id:id>/versions/<str:version>/content",
        versions({"get": "content"}),
        name="skill-version-content",
    ),
]
