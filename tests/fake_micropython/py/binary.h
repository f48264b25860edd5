/* Stand-in for MicroPython's py/binary.h (tests only; see py/mpconfig.h). */
#ifndef MICROPY_INCLUDED_PY_BINARY_H
#define MICROPY_INCLUDED_PY_BINARY_H

#include "py/obj.h"

/* the typecode a bytearray reports in its buffer info */
#define BYTEARRAY_TYPECODE 1

#endif
