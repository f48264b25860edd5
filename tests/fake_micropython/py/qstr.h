/* Stand-in for MicroPython's py/qstr.h (tests only; see py/mpconfig.h). The
   MP_QSTR_xxx enum comes from genhdr/qstrdefs.generated.h, which the tests
   write from the MP_QSTR_ names the module's source uses, in the format of
   MicroPython's makeqstrdata.py (QDEF0: static qstrs, QDEF1: the others). */
#ifndef MICROPY_INCLUDED_PY_QSTR_H
#define MICROPY_INCLUDED_PY_QSTR_H

#include "py/mpconfig.h"
#include "py/misc.h"

enum {
    #ifndef NO_QSTR
#define QDEF0(id, hash, len, str) id,
#define QDEF1(id, hash, len, str)
    #include "genhdr/qstrdefs.generated.h"
#undef QDEF0
#undef QDEF1
    #endif
    MP_QSTRnumber_of_static,
    MP_QSTRstart_of_main = MP_QSTRnumber_of_static - 1,

    #ifndef NO_QSTR
#define QDEF0(id, hash, len, str)
#define QDEF1(id, hash, len, str) id,
    #include "genhdr/qstrdefs.generated.h"
#undef QDEF0
#undef QDEF1
    #endif
    MP_QSTRnumber_of,
};

typedef size_t qstr;

#endif
