"""appliance.protocol"""
