"""The Kokoro-82M weights as the server reads them: one on-disk layout (``layout.WeightLayout``).

Filling a layout (fetching from a local copy, S3, the Hub or the offline mirror; deriving the torch weights;
pushing to S3) is install- and deploy-time work: ``python -m scripts.weights`` (docs/weights.md).
"""
