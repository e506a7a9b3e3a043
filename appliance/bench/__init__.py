"""appliance.bench"""
