"""Requesting, tracking and cancelling runs: the control plane side of a pipeline run."""
