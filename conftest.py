"""Hypothesis profiles for every test run: HYPOTHESIS_PROFILE=ci|dev|thorough."""

from radixkv_conformance.search_settings import load_profile

load_profile()
