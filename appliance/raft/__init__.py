"""appliance.raft"""
