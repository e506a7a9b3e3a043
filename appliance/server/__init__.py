"""appliance.server"""
