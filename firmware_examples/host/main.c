/* The smallest firmware-shaped program around a generated model.h: a static
   arena, the input written in place, one inference, the output read in place.
   On a microcontroller the printf becomes your UART/log call.

   Build (after `cuvil-mcu gen model.onnx -o out/`):
       cc -std=c99 -O2 -Wall -Wextra -pedantic -Iout firmware_examples/host/main.c -lm */
#include <stdio.h>

#define MODEL_IMPLEMENTATION
#include "model.h"

static unsigned char arena[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;

int main(void)
{
    model_input_0_t *in = (model_input_0_t *)model_input(arena, 0);
    const model_output_0_t *out;
    unsigned i, best = 0;
    int status;

    /* A fixed test pattern stands in for the sensor data. */
    for (i = 0; i < MODEL_INPUT_0_SIZE; ++i)
        in[i] = (model_input_0_t)((int)(i % 17u) - 8) / (model_input_0_t)8;

    status = model_run(arena);
    if (status != MODEL_OK) {
        printf("model_run failed: %s\n", model_status_str(status));
        return 1;
    }
    out = (const model_output_0_t *)model_output(arena, 0);
    for (i = 0; i < MODEL_OUTPUT_0_SIZE; ++i) {
        if (out[i] > out[best]) best = i;
    }
    printf("arena %u bytes, output 0 (%s): %u values, argmax %u (%.4f)\n",
           (unsigned)MODEL_ARENA_SIZE, MODEL_OUTPUT_0_NAME, (unsigned)MODEL_OUTPUT_0_SIZE,
           best, (double)out[best]);
    return 0;
}
