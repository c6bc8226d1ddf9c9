/* The first part of `cinder info`: what a GGUF file is, from its metadata and tensor table
 * alone, so it prints even for a file cinder cannot load (a type it does not compute, RoPE
 * scaling): names, llama.cpp's file type, shards, bytes on disk, context and RoPE, the chat
 * template it recognises, and how many tensors and bytes of each type. */
#pragma once
#include <stdio.h>

#include "runtime/gguf/gguf.h"

void info_print_file(FILE *out, const gguf_file *f, const char *path);
