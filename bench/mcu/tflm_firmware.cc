/* The TFLite Micro peer of firmware.c: a MicroInterpreter over the model in
 * tflm_model.h (written by tflm_models.py), the same marks as firmware.c
 * (an empty pair, init's pair, then one pair per step, read by measure() in
 * bench_mcu.py), every output printed as the hex of its float32 bits, then
 * the arena the model used and the stack's high-water mark.
 *
 * A step (between its marks) copies the input frame into the input tensor,
 * runs Invoke and copies the output out, as tfaot's NAME_step reads its input
 * and writes its output. A one-step recurrent model's new state is copied
 * into its state inputs after the step's closing mark: the bookkeeping a
 * fused op does not need is left out of the peer's count.
 *
 * Built with -DTFLM_BASELINE it is the same skeleton without TFLM and the
 * model: bench_mcu.py subtracts its size from the peer's to give the flash
 * the peer adds (TFLM's code it links + the model). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "firmware_io.h"
#include "inputs.h"

#ifndef TFLM_BASELINE
#include <new>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"
#include "tflm_model.h"

/* The arena in .bss (TFLM_ARENA_BYTES, more than any model here needs; the
 * firmware reports arena_used_bytes()). */
alignas(16) static uint8_t arena[TFLM_ARENA_BYTES];
static float state[TFLM_STATE_FLOATS];
/* The op resolver and the interpreter in .bss too (constructed in init by
 * placement new: the start-up code runs no global constructors), so that the
 * stack measured is what TFLM's calls use, as for tfaot's context. */
using Resolver = tflite::MicroMutableOpResolver<TFLM_NUM_OPS>;
alignas(Resolver) static uint8_t resolver_mem[sizeof(Resolver)];
alignas(tflite::MicroInterpreter) static uint8_t interpreter_mem[sizeof(tflite::MicroInterpreter)];
#else
#define TFLM_OUTPUT_SIZE 1
#endif

static float out[TFLM_OUTPUT_SIZE];

/* TFLM never allocates from a heap, but classes with virtual destructors
 * reference the sized and unsized operator delete; these keep libstdc++'s
 * (and with it malloc and the _sbrk it wants) out of the image. Never called. */
void operator delete(void *) noexcept {}
void operator delete(void *, size_t) noexcept {}

extern "C" int main(void) {
  volatile uint32_t *bottom = paint_stack();
  tfaot_mark(); /* an empty pair: what the marks themselves cost */
  tfaot_mark();
#ifndef TFLM_BASELINE
  /* init: the model's flatbuffer, the op resolver (exactly the model's ops),
   * the interpreter and AllocateTensors (which also resets variable
   * tensors: the fused LSTM's state), and a zero initial state */
  tfaot_mark();
  const tflite::Model *model = tflite::GetModel(tflm_model);
  Resolver &resolver = *new (resolver_mem) Resolver();
  TFLM_ADD_OPS(resolver)
  tflite::MicroInterpreter &interpreter =
      *new (interpreter_mem) tflite::MicroInterpreter(model, resolver, arena, sizeof arena);
  int status = interpreter.AllocateTensors() != kTfLiteOk;
  float *input = interpreter.input(TFLM_INPUT)->data.f;
  const float *output = interpreter.output(TFLM_OUTPUT)->data.f;
  for (int s = 0; s < TFLM_NUM_STATES; s++)
    memset(interpreter.input(tflm_state_in[s])->data.f, 0, tflm_state_size[s] * sizeof(float));
  tfaot_mark();
  if (status != 0) return 1;
  for (size_t i = 0; i < STEPS; i++) {
    tfaot_mark();
    memcpy(input, inputs[i], TFLM_INPUT_SIZE * sizeof(float));
    status = interpreter.Invoke() != kTfLiteOk;
    memcpy(out, output, sizeof out);
    tfaot_mark();
    if (status != 0) return 2;
    /* the new state into the next step's state inputs, through a copy: the
     * arena planner may have given an input's buffer to another output */
    size_t at = 0;
    for (int s = 0; s < TFLM_NUM_STATES; at += tflm_state_size[s++])
      memcpy(state + at, interpreter.output(tflm_state_out[s])->data.f,
             tflm_state_size[s] * sizeof(float));
    at = 0;
    for (int s = 0; s < TFLM_NUM_STATES; at += tflm_state_size[s++])
      memcpy(interpreter.input(tflm_state_in[s])->data.f, state + at,
             tflm_state_size[s] * sizeof(float));
    print_floats(out, TFLM_OUTPUT_SIZE);
  }
  print_word("arena", (uint32_t)interpreter.arena_used_bytes());
  print_word("objects", (uint32_t)(sizeof(Resolver) + sizeof(tflite::MicroInterpreter)));
#else
  /* the same marks and a step that copies its input, so that the baseline
   * links what the peer links outside TFLM */
  tfaot_mark();
  tfaot_mark();
  for (size_t i = 0; i < STEPS; i++) {
    tfaot_mark();
    memcpy(out, inputs[i], sizeof out);
    tfaot_mark();
    print_floats(out, TFLM_OUTPUT_SIZE);
  }
#endif
  print_stack_used(bottom);
  semihost_puts("done\n");
  return 0;
}
