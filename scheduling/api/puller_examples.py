"""Request examples for the API docs: what a worker really sends to pull and report."""

from drf_spectacular.utils import OpenApiExample

EXECUTION = "3f2b8c4e-9d1a-4e57-b6c0-2a7d5e9f1c84"
LEASE = "b7e4a1d2-6c3f-4a85-9e2b-0d1c7f6a3e59"

PULL_EXAMPLES = [
    OpenApiExample(
        "Pull four",
        summary="Lease up to four agendas, long-polling up to 10 s",
        description="`request_id` is new for every pull: repeating a pull whose answer was "
        "lost with the same id returns the executions it leased, not new ones.",
        value={
            "count": 4,
            "worker": "transcoder-01",
            "wait_seconds": 10,
            "request_id": "transcoder-01-000123",
        },
        request_only=True,
    ),
]

PROGRESS_REPORT = {
    "percent_complete": 40,
    "message": "transcoding",
    "operations": [
        {
            "name": "probe",
            "state": "succeeded",
            "percent_complete": 100,
            "result": {"summary": {"duration": 12.5, "width": 1920, "height": 1080}},
        },
        {
            "name": "transcode",
            "state": "executing",
            "percent_complete": 20,
            "message": "frame 300 of 1500",
        },
    ],
}
SUCCEEDED_REPORT = {
    "state": "succeeded",
    "percent_complete": 100,
    "operations": [
        {
            "name": "transcode",
            "state": "succeeded",
            "percent_complete": 100,
            "result": {
                "output": "/media/out/clip-720p.mp4",
                "outputs": [
                    {"path": "/media/out/clip-720p.mp4", "kind": "video", "bytes": 18234112}
                ],
            },
        }
    ],
}
FAILED_REPORT = {
    "state": "failed",
    "retryable": False,
    "message": "input not found",
    "operations": [
        {
            "name": "probe",
            "state": "failed",
            "retryable": False,
            "message": "/media/in/clip.mov: No such file or directory",
        }
    ],
    "diagnostics": [{"message": "ffprobe exited with status 1", "code": "ffprobe_failed"}],
}

REPORT_EXAMPLES = [
    OpenApiExample(
        "Progress",
        summary="Progress: the probe is done, the transcode at 20 %",
        value=PROGRESS_REPORT,
        request_only=True,
    ),
    OpenApiExample(
        "Succeeded",
        summary="Done: the agenda succeeded, with the file it wrote",
        value=SUCCEEDED_REPORT,
        request_only=True,
    ),
    OpenApiExample(
        "Failed for good",
        summary="Failed, and retrying cannot help (retryable: false)",
        value=FAILED_REPORT,
        request_only=True,
    ),
    OpenApiExample(
        "Heartbeat",
        summary="An empty report: renews the lease only",
        value={},
        request_only=True,
    ),
]

BATCH_REPORT_EXAMPLES = [
    OpenApiExample(
        "Two executions",
        summary="Progress of one execution and the end of another",
        value={
            "reports": [
                {"execution": EXECUTION, "lease_token": LEASE, **PROGRESS_REPORT},
                {
                    "execution": "8a6d0f3b-2e4c-4b19-a7d5-c3e1f9b20d67",
                    "lease_token": "e1c9b5a7-3d2f-4f60-8b4e-5a7c9d1e2f03",
                    **SUCCEEDED_REPORT,
                },
            ]
        },
        request_only=True,
    ),
]
