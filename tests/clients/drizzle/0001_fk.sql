DO $$ BEGIN
 ALTER TABLE "d_posts" ADD CONSTRAINT "d_posts_author_id_d_users_id_fk" FOREIGN KEY ("author_id") REFERENCES "public"."d_users"("id") ON DELETE cascade ON UPDATE no action;
EXCEPTION
 WHEN duplicate_object THEN null;
END $$;
