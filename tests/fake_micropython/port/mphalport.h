/* The tests' MicroPython "port" HAL (what a port's mphalport.h sets): the
   atomic section calls into driver.c, which counts the sections, checks that
   each begin has its end, and lets a test enter run() from inside one
   (another thread, in effect). */
mp_uint_t fake_atomic_begin(void);
void fake_atomic_end(mp_uint_t state);
#define MICROPY_BEGIN_ATOMIC_SECTION() fake_atomic_begin()
#define MICROPY_END_ATOMIC_SECTION(state) fake_atomic_end(state)
