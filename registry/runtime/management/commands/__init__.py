"""`runsessions`: the runtime worker loop."""
