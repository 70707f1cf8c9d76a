"""Skills: filesystem-shaped bundles (`skill_...`) with a `SKILL.md`, in immutable versions, that agents load."""
