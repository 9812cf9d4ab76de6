"""comlrl trainers: preference learning (MADPO, MARLHF), the MAGRPO family and actor-critic."""
