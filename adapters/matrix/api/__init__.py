"""The homeserver: the nio client, room reads, direct rooms, power levels, names."""
