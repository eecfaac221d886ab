"""Media for the tests that run the real ffprobe/ffmpeg handlers."""

import subprocess
from pathlib import Path


def generated_clip(path: Path, *, seconds: int = 2, size: str = "160x120") -> Path:
    """An H.264/AAC clip of a test pattern and a tone, made by ffmpeg."""
    subprocess.run(
        [
            "ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc=duration={seconds}:size={size}:rate=25",
            "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}",
            "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path),
        ],
        check=True,
    )  # fmt: skip
    return path
