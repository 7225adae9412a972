"""What adapters share, and the only adapter package they may all import: problem+json
responses, the webhook client every answer sink posts through, strict JSON bodies, RFC 3339
times and CloudEvents."""
