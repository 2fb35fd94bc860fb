"""(wing docstring to come)"""
