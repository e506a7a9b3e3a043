"""appliance.cli"""
