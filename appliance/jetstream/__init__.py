"""appliance.jetstream"""
