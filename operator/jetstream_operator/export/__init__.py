"""Onboarding: manifests for what already exists, from a live account or from NACK resources.

kinds.py maps a server config back to a spec, one KindMapping per kind; manifests.py names and
assembles the manifests; account.py reads the account; nack.py converts NACK manifests.
"""
