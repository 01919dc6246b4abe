"""Installed distribution versions, read from package metadata (no import of the package)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version(package: str) -> str | None:
    """The installed version of distribution `package`, or None where it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def installed_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    return {package: installed_version(package) for package in packages}
