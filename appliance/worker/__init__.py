"""appliance.worker"""
