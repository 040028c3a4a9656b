(* bench/heapfill_periodic.ml — for `make bench-heapfill`: two functions
   allocating the same bytes in turn, with a period of one minor heap (256 Ki
   words by default): the worst case for a sampler whose period is the minor
   heap. Run: heapfill_periodic.exe OUT RATE *)
let sink = Array.make 8 (Obj.repr 0)
let[@inline never] store i v = Array.unsafe_set sink (i land 7) (Obj.repr v)

(* 26,214 tuples of 5 words: 131,070 words, half a minor heap *)
let[@inline never] producer () =
  for i = 1 to 26_214 do store i (i, i, i, i) done

let[@inline never] consumer () =
  for i = 1 to 26_214 do store i (i, i, i, i) done

let () =
  Flamme.start ~output:Sys.argv.(1) ~alloc:(float_of_string Sys.argv.(2)) ();
  for _ = 1 to 400 do producer (); consumer () done;
  Flamme.stop ()
