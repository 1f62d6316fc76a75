"""What kvlab's tests and benchmarks stand on, kept out of the library proper: nothing under kvlab/ outside this
package imports it (tests/test_imports.py holds that)."""
