"""Robot transports; each is imported only when chosen (`sim` needs mujoco, `dds` cyclonedds)."""
