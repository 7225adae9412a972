"""The Review flow (answer rule 2): the whole request in a paged modal, decided there."""
