"""appliance.config"""
