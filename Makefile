.PHONY: test conformance

test:
	python -m pytest -q

# the whole ONNX backend suite through ember; rewrites bench/results/conformance.{json,md} and
# the passing list that tests/test_conformance.py guards
conformance:
	python bench/conformance.py -q
