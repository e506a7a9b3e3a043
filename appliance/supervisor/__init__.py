"""appliance.supervisor"""
