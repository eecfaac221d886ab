"""A password hasher for the test run: Django's own PBKDF2 at 1,000 iterations instead of
1,000,000. Every test user has a password, and hashing it at full strength took about half a
second per user — most of the suite's time. The hashes it writes are ordinary
`pbkdf2_sha256$1000$…` strings, so a live server under test (which keeps the default hashers)
still verifies them, and upgrades them on login as it would any old hash."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
