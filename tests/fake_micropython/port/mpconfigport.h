/* The tests' MicroPython "port" configuration (what a port's mpconfigport.h
   sets): object representation A, single-precision floats (double with
   -DFAKE_MP_FLOAT_DOUBLE, as the unix port), setjmp NLR. driver.c is the
   port's runtime. */
#define MICROPY_CONFIG_ROM_LEVEL (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)
#ifdef FAKE_MP_FLOAT_DOUBLE
#define MICROPY_FLOAT_IMPL (MICROPY_FLOAT_IMPL_DOUBLE)
#else
#define MICROPY_FLOAT_IMPL (MICROPY_FLOAT_IMPL_FLOAT)
#endif
#define MICROPY_NLR_SETJMP (1)
