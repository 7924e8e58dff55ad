"""recovery: rebuild the eventual checkpoint from an output log and replay exactly."""
