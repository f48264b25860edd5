/* Stand-in for MicroPython's py/mpstate.h (tests only; see py/mpconfig.h):
   here only the includes through which py/runtime.h brings py/nlr.h and
   py/obj.h, as the real one does. */
#ifndef MICROPY_INCLUDED_PY_MPSTATE_H
#define MICROPY_INCLUDED_PY_MPSTATE_H

#include <stdint.h>

#include "py/mpconfig.h"
#include "py/misc.h"
#include "py/nlr.h"
#include "py/obj.h"

#endif
