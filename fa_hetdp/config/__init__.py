"""Configuration, validated once.

Scenario files and every run setting, checked by one set of declared rules.
"""
