"""appliance.cluster"""
