"""appliance.testing"""
