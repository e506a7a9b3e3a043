"""appliance.spark"""
