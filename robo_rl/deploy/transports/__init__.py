"""Robot transports, one module (or package) each, registered in robo_rl.deploy.robot.TRANSPORTS when imported;
the deploy core imports one only when it is chosen (`sim` needs mujoco, `dds` cyclonedds)."""
