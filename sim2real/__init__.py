"""Booster T1 sim-to-real: the deployment contract (t1), the export bundle, the native-MuJoCo sim-to-sim gate, the deploy-path emulation."""
