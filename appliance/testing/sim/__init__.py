"""The deterministic RAFT simulator: real RaftGroups on simulated clock, network and disk, one seed.

Entry points: `Simulator(SimOptions(seed=...)).run() -> SimResult` and `appliance sim`.
"""
