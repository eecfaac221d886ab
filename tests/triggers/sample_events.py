"""Events as an object store's ObjectCreated notification carries them (S3's shape)."""


def s3_event(
    key: str = "incoming/clip-0042.mov", sequencer: str = "0001", name: str = "ObjectCreated:Put"
) -> dict:
    return {
        "Records": [
            {
                "eventName": name,
                "s3": {
                    "bucket": {"name": "ingest"},
                    "object": {"key": key, "sequencer": sequencer},
                },
            }
        ]
    }
