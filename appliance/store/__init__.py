"""appliance.store"""
