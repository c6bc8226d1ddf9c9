/* The program of each layer_link_* check (cmake/layers.cmake): nothing runs; linking the layer's
 * whole archive against its declared layers is the check. */
int main(void) { return 0; }
