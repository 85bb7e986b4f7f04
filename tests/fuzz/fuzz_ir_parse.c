/* libFuzzer target: any text into kir_parse (which verifies). A program that
 * parses must verify again and print back to a text that parses and prints
 * to the same text (the round trip frontends rely on). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/ir.h"

static void fuzz_fail(const char *what, const char *text) {
  fprintf(stderr, "fuzz_ir_parse: %s\n%s\n--- message: %s\n", what, text ? text : "",
          kiln_last_error());
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  kir_program *p = NULL, *q = NULL;
  char *first = NULL, *second = NULL;
  if (kir_parse(text, &p) == KILN_OK) {
    if (kir_verify(p) != KILN_OK) fuzz_fail("a parsed program does not verify", text);
    if (kir_print(p, &first) != KILN_OK) fuzz_fail("a parsed program does not print", text);
    if (kir_parse(first, &q) != KILN_OK) fuzz_fail("printed text does not parse", first);
    if (kir_print(q, &second) != KILN_OK) fuzz_fail("reparsed program does not print", first);
    if (strcmp(first, second) != 0) fuzz_fail("print -> parse -> print changed the text", first);
  }
  free(second);
  free(first);
  kir_program_free(q);
  kir_program_free(p);
  free(text);
  return 0;
}
