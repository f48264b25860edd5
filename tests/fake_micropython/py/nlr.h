/* Stand-in for MicroPython's py/nlr.h (tests only; see py/mpconfig.h): the
   setjmp implementation (MICROPY_NLR_SETJMP, the real header's choice for
   machines without assembler NLR), which the tests' port selects. */
#ifndef MICROPY_INCLUDED_PY_NLR_H
#define MICROPY_INCLUDED_PY_NLR_H

#include <limits.h>
#include <assert.h>
#include <stdbool.h>

#include "py/mpconfig.h"

#if !MICROPY_NLR_SETJMP
#error "the stand-in py/nlr.h implements MICROPY_NLR_SETJMP only"
#endif
#include <setjmp.h>

typedef struct _nlr_buf_t nlr_buf_t;
struct _nlr_buf_t {
    nlr_buf_t *prev;
    void *ret_val;
    jmp_buf jmpbuf;
};

/* a macro: setjmp must run in the frame that later longjmps back to it */
#define nlr_push(buf) (nlr_push_tail(buf), setjmp((buf)->jmpbuf))

unsigned int nlr_push_tail(nlr_buf_t *top);
void nlr_pop(void);
MP_NORETURN void nlr_jump(void *val);

#endif
