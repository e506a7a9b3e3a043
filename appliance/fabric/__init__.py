"""appliance.fabric"""
