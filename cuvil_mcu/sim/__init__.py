"""Run generated code: on the host (sim.host) and on emulated cores."""
