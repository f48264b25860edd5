/* Stand-in for MicroPython's py/mphal.h (tests only; see py/mpconfig.h):
   the port's <mphalport.h>, then the defaults of what it leaves out. */
#ifndef MICROPY_INCLUDED_PY_MPHAL_H
#define MICROPY_INCLUDED_PY_MPHAL_H

#include <stdint.h>
#include <stddef.h>

#include "py/mpconfig.h"

#include <mphalport.h>

/* ports with threads or interrupts make these a mutex or interrupts off */
#ifndef MICROPY_BEGIN_ATOMIC_SECTION
#define MICROPY_BEGIN_ATOMIC_SECTION() (0)
#endif
#ifndef MICROPY_END_ATOMIC_SECTION
#define MICROPY_END_ATOMIC_SECTION(state) (void)(state)
#endif

#endif
