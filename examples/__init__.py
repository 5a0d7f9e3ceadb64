"""Studies built on the library, each a folder with its README, configs and driver."""
